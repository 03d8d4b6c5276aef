package publish

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Clock tells the bus's own time. The bus issues and checks tokens and
// measures limits against it; the core only ages cached story heads on it
// (Options.Clock), and decides leases and contention by the store's
// (StoreClock).
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// StoreClock tells the store's time, which stamps every record: the lease
// is measured on it, so that a bus whose clock differs from the store's
// still gives a recorded message exactly its 30 s. Tests inject one to
// cross the lease without sleeping.
type StoreClock interface {
	StoreNow(ctx context.Context) (time.Time, error)
}

// recordsClock asks the records bucket's stream for the time: the server
// stamps its answer.
type recordsClock struct{ kv jetstream.KeyValue }

// StoreNow returns the time of the server that answers for the records.
func (c recordsClock) StoreNow(ctx context.Context) (time.Time, error) {
	st, err := c.kv.Status(ctx)
	if err != nil {
		return time.Time{}, err
	}
	b, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || b.StreamInfo().TimeStamp.IsZero() {
		return time.Time{}, errors.New("the store did not say its time")
	}
	return b.StreamInfo().TimeStamp, nil
}
