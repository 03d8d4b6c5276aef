package publish

import (
	"context"
	"errors"

	"github.com/storybus/storybus/bus/store"
)

// FaultPoint names a step of the publish core where a fault can be injected.
type FaultPoint string

// The fault points, in the order a publish passes them.
const (
	// FaultAfterRecord: the record is written, nothing published.
	FaultAfterRecord FaultPoint = "after-record"
	// FaultBeforePublish: just before the topic publish (after the head check).
	FaultBeforePublish FaultPoint = "before-publish"
	// FaultPublish: an error returned here is the publish's definite failure.
	FaultPublish FaultPoint = "publish"
	// FaultAfterPublish: published, the record not yet marked.
	FaultAfterPublish FaultPoint = "after-publish"
	// FaultRemove: an error returned here is the failure of removing a record.
	FaultRemove FaultPoint = "remove"
	// FaultMark: an error returned here is the failure of the mark.
	FaultMark FaultPoint = "mark"
)

// FaultPoints lists every fault point.
var FaultPoints = []FaultPoint{FaultAfterRecord, FaultBeforePublish, FaultPublish, FaultAfterPublish, FaultRemove, FaultMark}

// ErrStop, returned by a fault hook, abandons the publish as if the process
// had stopped at that point: no answer is given and nothing is cleaned up.
var ErrStop = errors.New("publish: stopped at a fault point")

// Faults is called at every fault point; nil means no faults.
type Faults func(ctx context.Context, point FaultPoint, messageID string) error

// fault calls the fault hook. Any error but ErrStop becomes a failure that
// wrote nothing (store.ErrNotWritten): it stands in for the step.
func (c *Core) fault(ctx context.Context, p FaultPoint, id string) error {
	if c.faults == nil {
		return nil
	}
	err := c.faults(ctx, p, id)
	if err == nil || errors.Is(err, ErrStop) {
		return err
	}
	return errors.Join(store.ErrNotWritten, err)
}
