//go:build !linux

package gitws

import "errors"

// watcher needs inotify: elsewhere every snapshot is a full one.
type watcher struct{}

var errOverflow = errors.New("gitws: inotify queue overflowed")

func newWatcher(string) (*watcher, error) { return nil, errors.New("gitws: no inotify") }

func (w *watcher) close()                          {}
func (w *watcher) watch(string) error              { return errors.New("gitws: no inotify") }
func (w *watcher) watched(string) bool             { return false }
func (w *watcher) unwatch(string)                  {}
func (w *watcher) drain(map[string]struct{}) error { return errOverflow }
