package cli_test

import "time"

// runtimeGosched yields while polling for another process's state. A poll
// interval, not a synchronisation: the condition is re-checked each time.
func runtimeGosched() { time.Sleep(5 * time.Millisecond) }
