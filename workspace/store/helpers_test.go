package store_test

import (
	"fmt"

	"github.com/gantryhq/gantry/workspace/wstype"
)

func describe(w wstype.Workspace) string {
	return fmt.Sprintf("observed=%s desired=%s op=%s err=%d info=%+v", w.ObservedStatus, w.DesiredState, w.Operation, w.ErrorCount, w.ErrorInfo)
}
