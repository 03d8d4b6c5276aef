package cli

import (
	"context"
	"log/slog"
	"strings"
)

// namedLevels writes every level as one of DEBUG, INFO, WARN and ERROR:
// logr's verbosity V(n) reaches slog as level -n, which slog would write
// as DEBUG+3 and the like.
func namedLevels(_ []string, a slog.Attr) slog.Attr {
	if a.Key != slog.LevelKey {
		return a
	}
	l, ok := a.Value.Any().(slog.Level)
	if !ok {
		return a
	}
	switch {
	case l < slog.LevelInfo:
		return slog.String(a.Key, "DEBUG")
	case l < slog.LevelWarn:
		return slog.String(a.Key, "INFO")
	case l < slog.LevelError:
		return slog.String(a.Key, "WARN")
	}
	return slog.String(a.Key, "ERROR")
}

// quietStop is a slog.Handler that, once stopping is closed, writes at INFO
// the errors a normal stop causes: requests cut short by the cancelled
// context (Events being written, a reconcile's API call) and
// controller-runtime's note that leader election ended, which it only
// makes after the stop began. Before the stop, every ERROR stays one.
//
// It also holds the attributes loggers are derived with until a record
// is written: controller-runtime derives a logger for every reconcile
// (its controller, object and reconcile ID), and the JSON handler
// formats a derived logger's attributes at once, which at hundreds of
// Tenants, with the operator writing errors only, was a fiftieth of its
// CPU for lines it never wrote.
type quietStop struct {
	slog.Handler
	stopping <-chan struct{}
	// pending are the attributes not given to Handler yet, the last
	// derivation's first.
	pending *pendingAttrs
}

// pendingAttrs are the attributes of one derivation, and those of the
// derivations before it: a derived logger shares its parent's instead of
// copying them.
type pendingAttrs struct {
	parent *pendingAttrs
	attrs  []slog.Attr
}

// Handle implements slog.Handler.
func (q quietStop) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && q.stopped() && causedByStop(r) {
		r = r.Clone()
		r.Level = slog.LevelInfo
	}
	return q.resolved().Handle(ctx, r)
}

// WithAttrs implements slog.Handler: the attributes wait for a record
// (a handler owns the slice it is given).
func (q quietStop) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return q
	}
	q.pending = &pendingAttrs{parent: q.pending, attrs: as}
	return q
}

// WithGroup implements slog.Handler.
func (q quietStop) WithGroup(name string) slog.Handler {
	return quietStop{Handler: q.resolved().WithGroup(name), stopping: q.stopping}
}

// resolved is Handler with the pending attributes, in the order given.
func (q quietStop) resolved() slog.Handler {
	var chain []*pendingAttrs
	for p := q.pending; p != nil; p = p.parent {
		chain = append(chain, p)
	}
	h := q.Handler
	for i := len(chain) - 1; i >= 0; i-- {
		h = h.WithAttrs(chain[i].attrs)
	}
	return h
}

func (q quietStop) stopped() bool {
	select {
	case <-q.stopping:
		return true
	default:
		return false
	}
}

// causedByStop reports whether r is an error a stop causes.
func causedByStop(r slog.Record) bool {
	if r.Message == "error received after stop sequence was engaged" {
		return true
	}
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if strings.Contains(a.Value.String(), context.Canceled.Error()) {
			found = true
		}
		return !found
	})
	return found
}
