package sched_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gantryhq/gantry/sched"
)

// greeter answers each message by yielding a "lookup" command and, when the
// lookup completes, reporting the result.
type greeter struct {
	results chan<- string
	nextTag uint64
}

type lookup struct{ name string }

const cmdLookup sched.CommandType = 256

func (lookup) CommandType() sched.CommandType { return cmdLookup }

func (g *greeter) Init(context.Context, string, []any) error { return nil }
func (g *greeter) Close()                                    {}

func (g *greeter) Step(events []sched.Event, out *sched.StepOutput) error {
	out.Status = sched.StatusWaitMessages
	for _, ev := range events {
		switch ev.Type {
		case sched.EventMessage:
			g.nextTag++
			out.Yield(g.nextTag, lookup{name: ev.Data.(string)})
			out.Status = sched.StatusWaitYields
		case sched.EventYieldComplete:
			g.results <- ev.Data.(string)
		case sched.EventCancel:
			out.Status = sched.StatusDone
		}
	}
	return nil
}

func Example() {
	results := make(chan string, 1)
	s, err := sched.New(sched.Config{
		Workers: 2,
		Handlers: map[sched.CommandType]sched.Handler{
			cmdLookup: sched.HandlerFunc(func(_ context.Context, cmd sched.Command, tag uint64, c sched.Completer) error {
				// Real handlers hand the work to another goroutine.
				go c.CompleteYield(tag, "hello, "+cmd.(lookup).name, nil)
				return nil
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	pid, err := s.Spawn(&greeter{results: results}, "main", nil)
	if err != nil {
		panic(err)
	}
	if err := s.Send(pid, "gantry"); err != nil {
		panic(err)
	}
	fmt.Println(<-results)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println("stop:", s.Stop(ctx))
	// Output:
	// hello, gantry
	// stop: <nil>
}
