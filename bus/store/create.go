package store

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The waits of CreateOrUpdate: the first attempt's, doubled for each
// next one up to the longest, for at most createAttempts attempts (about
// 47 s in all). A create on a healthy cluster is answered in well under
// a second, so a lost answer costs about that first wait.
const (
	firstCreateWait = 500 * time.Millisecond
	maxCreateWait   = 16 * time.Second
	createAttempts  = 7
)

// CreateOrUpdate runs op, the creation or update of a stream or a bucket
// (jetstream's CreateOrUpdateStream or CreateOrUpdateKeyValue), until the
// store answers it. Buses that create one clustered stream at the same
// time, as the replicas of a pool starting together do, can each go
// unanswered by nats-server although the stream is created: op is then
// run again, with a longer wait, and updates the stream it finds. A
// create told the name is taken (another bus created it with a different
// configuration meanwhile) is run again too, and updates it. Every other
// failure, and the end of ctx, is returned as it is.
func CreateOrUpdate[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	wait := firstCreateWait
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, wait)
		v, err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil || attempt == createAttempts || !unansweredCreate(err) {
			return v, err
		}
		wait = min(2*wait, maxCreateWait)
	}
}

// unansweredCreate reports a create that may have been applied though
// its answer did not say so.
func unansweredCreate(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrStreamNameAlreadyInUse)
}
