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
// configuration meanwhile) is run again too, and updates it; so is one
// told at once that the stream is not there yet (just created by another
// bus) or that too few servers are online to place it, after a pause of
// a quarter of the attempt's wait. Every other failure, and the end of
// ctx, is returned as it is.
func CreateOrUpdate[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	wait := firstCreateWait
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, wait)
		v, err := op(actx)
		answered := actx.Err() == nil
		cancel()
		if err == nil || ctx.Err() != nil || attempt == createAttempts || !unansweredCreate(err) {
			return v, err
		}
		if answered {
			// Told "not yet" at once: give the cluster a quarter of the
			// attempt's wait before asking again.
			select {
			case <-ctx.Done():
				return v, err
			case <-time.After(wait / 4):
			}
		}
		wait = min(2*wait, maxCreateWait)
	}
}

// unansweredCreate reports a create that may have been applied though
// its answer did not say so, or one the cluster is not ready to answer
// yet: a stream (or bucket) just created by another bus that the server
// asked does not know of yet, or a cluster with a server offline, which
// cannot place a replicated stream until it is back (a cluster starting,
// or a node restarting).
func unansweredCreate(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == noPeersForPlacement
}

// noPeersForPlacement is nats-server's answer to a replicated stream's
// create or update when too few servers are online to hold its replicas.
const noPeersForPlacement jetstream.ErrorCode = 10005
