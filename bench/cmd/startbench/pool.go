package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gantryhq/gantry/workspace"
)

// startPool creates the template (the command every cold start runs) and
// sets its pool to -pool members; waitPoolFull waits for them.
func (s *server) startPool(ctx context.Context) error {
	if _, err := s.admin.CreateTemplate(ctx, workspace.Template{Name: templateName, Command: wsCommand}); err != nil {
		return fmt.Errorf("create template %s: %w", templateName, err)
	}
	if _, err := s.admin.SetPool(ctx, templateName, s.b.cfg.pool); err != nil {
		return err
	}
	t0 := time.Now()
	if err := s.waitPool(ctx, s.b.cfg.pool); err != nil {
		return err
	}
	log.Printf("warm pool of %d ready in %v", s.b.cfg.pool, time.Since(t0).Round(time.Millisecond))
	return nil
}

// waitPool polls the pool (every 20 ms) until want members are ready.
func (s *server) waitPool(ctx context.Context, want int) error {
	ctx, cancel := context.WithTimeout(ctx, s.b.cfg.timeout)
	defer cancel()
	var st workspace.PoolStatus
	var err error
	for {
		if st, err = s.admin.Pool(ctx, templateName); err == nil && st.Ready >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("warm pool not %d ready after %v: last %+v (%v)", want, s.b.cfg.timeout, st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopPool sets the pool to 0 and waits (2 min at most) until the server
// has drained its members; those left then are deleted here.
func (s *server) stopPool() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := s.admin.SetPool(ctx, templateName, 0); err != nil {
		log.Printf("set the pool to 0: %v", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := s.admin.Pool(ctx, templateName)
		if err == nil && st.Ready+st.Starting+st.Draining == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	left, err := s.admin.PoolMembers(ctx)
	if err != nil {
		log.Printf("list the pool's members: %v", err)
		return
	}
	for _, w := range left {
		if _, err := s.admin.Delete(ctx, w.ID); err != nil {
			log.Printf("delete pool member %s: %v", w.ID, err)
			continue
		}
		if err := s.waitGone(ctx, s.admin, w.ID, time.Minute); err != nil {
			log.Print(err)
		}
	}
}
