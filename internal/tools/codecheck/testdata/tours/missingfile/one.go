package missingfile

// One is here.
func One() {}
