// Package sleeps is a fixture for the testsleep rule.
package sleeps
