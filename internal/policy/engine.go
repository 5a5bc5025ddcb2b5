package policy

import "sync/atomic"

// Engine holds the policy set in force and swaps it atomically on reload.
type Engine struct {
	current atomic.Pointer[Set]
}

// NewEngine returns an engine serving set.
func NewEngine(set *Set) *Engine {
	e := &Engine{}
	e.current.Store(set)
	return e
}

// Set returns the policy set in force.
func (e *Engine) Set() *Set { return e.current.Load() }

// Swap puts a new set in force; evaluations already running finish on the old one.
func (e *Engine) Swap(set *Set) { e.current.Store(set) }
