package limits

// The limits bucket's reads and writes: JSON values at a revision, written
// by compare-and-swap.

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
)

// load reads a key's state and revision with a direct get, which any
// replica of the bucket answers; a missing key is the zero state at
// revision 0.
func (l *Limiter) load(ctx context.Context, key string) (state, uint64, error) {
	return get[state](ctx, l.kv, key)
}

// confirm reads a key's state and revision from the bucket's leader, which
// checks the compare-and-swaps: after one failed over what a replica,
// perhaps behind the leader, said (store/leader.go), or for a refusal that
// needs the state as it is now.
func (l *Limiter) confirm(ctx context.Context, key string) (state, uint64, error) {
	return get[state](ctx, l.leader, key)
}

// getter reads a key: a jetstream.KeyValue, or a store.KVLeader.
type getter interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

// write stores the state if the key is still at the revision last seen.
func (l *Limiter) write(ctx context.Context, c *counter, st state) (uint64, error) {
	return l.put(ctx, c.key, st, c.rev)
}

// get reads a key's JSON value and revision: the zero value at revision 0
// when the key holds nothing. An unreadable value is the zero value, to be
// replaced, never trusted.
func get[T any](ctx context.Context, kv getter, key string) (T, uint64, error) {
	var v T
	e, err := kv.Get(ctx, key)
	switch {
	case store.IsMissing(err):
		return v, 0, nil
	case err != nil:
		return v, 0, err
	}
	if json.Unmarshal(e.Value(), &v) != nil {
		var zero T
		return zero, e.Revision(), nil
	}
	return v, e.Revision(), nil
}

// put writes v as a key's JSON value if the key is still at revision rev
// (0: holds nothing), a compare-and-swap.
func (l *Limiter) put(ctx context.Context, key string, v any, rev uint64) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return l.kv.Create(ctx, key, b)
	}
	return l.kv.Update(ctx, key, b, rev)
}
