//go:build !unix

package extsort

import "context"

// mapInputs does not map here: the caller reads the inputs.
func mapInputs(context.Context, []Input, int) (*inputMap, error) { return nil, nil }

// mapSegment does not map here: the merge reads the file.
func mapSegment(Segment) ([]byte, func(), error) { return nil, nil, nil }
