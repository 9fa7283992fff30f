package dsort

import (
	"errors"
	"testing"
)

func TestConfigValidation(t *testing.T) {
	for _, c := range []WorkerConfig{
		{Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}},
		{Master: "nohostport", Inputs: []string{"in"}, Output: "out"},
		{Master: "127.0.0.1:1", Inputs: []string{"in"}, Output: "out", Memory: 1 << 20},
	} {
		if _, err := NewWorker(c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewWorker(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := NewMaster(MasterConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewMaster with 0 workers: err = %v", err)
	}
}
