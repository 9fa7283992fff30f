package a

// Thing is a fixture type.
type Thing struct{ Name string }

// Say is a fixture method.
func (Thing) Say() {}
