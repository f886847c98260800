//go:build !linux

package checkpoint

import "errors"

// watcher needs inotify: elsewhere every snapshot is a full one.
type watcher struct{}

var errOverflow = errors.New("checkpoint: inotify queue overflowed")

func newWatcher(string) (*watcher, error) { return nil, errors.New("checkpoint: no inotify") }

func (w *watcher) close()                          {}
func (w *watcher) watch(string) error              { return errors.New("checkpoint: no inotify") }
func (w *watcher) watched(string) bool             { return false }
func (w *watcher) unwatch(string)                  {}
func (w *watcher) drain(map[string]struct{}) error { return errOverflow }
