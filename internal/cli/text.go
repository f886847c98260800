package cli

import "github.com/keel-run/keel/internal/tui"

// orDash is a cell's "-" for nothing.
var orDash = tui.OrDash
