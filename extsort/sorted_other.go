//go:build !unix

package extsort

// mapInputs cannot map here: SortInMemory reads the input.
func mapInputs([]Input) (*Sorted, []span, error) { return nil, nil, nil }

// maxMappedFiles is 0: nothing is mapped here.
var maxMappedFiles = 0
