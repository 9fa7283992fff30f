package store

import "time"

// SetMaxYield sets how long s's bulk batches wait for urgent work in
// flight (maxYield).
func SetMaxYield(s *Store, d time.Duration) { s.urgent.maxYield.Store(int64(d)) }
