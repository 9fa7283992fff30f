package a

// Extra is a fixture function.
func Extra() {}
