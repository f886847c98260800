package view

import "github.com/keel-run/keel/journal"

// Rows exports the reader's table to the tests.
func Rows() map[journal.Type]func(*Reader, *Row) { return rows }
