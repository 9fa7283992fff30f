package dsort

const helperEnv = "GANTRY_DSORT_TEST_HELPER"

func runHelper() int { return 0 }
func setupBinary()   {}
func cleanupBinary() {}
