// Package missingfile names one.go in its tour, and forgets the other file.
package missingfile
