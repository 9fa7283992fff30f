package tasks

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/gantryhq/gantry/record"
	"github.com/gantryhq/gantry/taskq"
)

func TestPayloadErrorsAreNotRetried(t *testing.T) {
	sort := Sort(nil)
	for _, p := range []string{`not json`, `{}`, `{"input":["x"]}`, `{"output":"o"}`, `{"input":["/no/such/dir"],"output":"o"}`} {
		if err := sort(t.Context(), taskq.NewTask("sort", []byte(p))); !errors.Is(err, taskq.SkipRetry) {
			t.Errorf("sort %s: %v, want SkipRetry", p, err)
		}
	}
}

func TestSortTaskSorts(t *testing.T) {
	in, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	if _, err := record.GenerateFile(t.Context(), filepath.Join(in, "part"), 0, 5000, record.GenOptions{}, 1, nil); err != nil {
		t.Fatal(err)
	}
	task := taskq.NewTask("sort", []byte(`{"input":["`+in+`"],"output":"`+out+`"}`))
	if err := Sort(nil)(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	if got := string(task.Result()); got != `{"partitions":1,"records":5000}` {
		t.Fatalf("result %s", got)
	}
}
