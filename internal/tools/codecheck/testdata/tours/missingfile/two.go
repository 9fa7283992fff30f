package missingfile

// Two is not in the tour.
func Two() {}
