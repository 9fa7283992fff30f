//go:build !unix

package extsort

import "context"

// mapInputs does not map here: the caller reads the inputs.
func mapInputs(context.Context, []Input, int) (*inputMap, error) { return nil, nil }
