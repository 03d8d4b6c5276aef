package publish

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/storybus/storybus/bus/store"
)

// Record states.
const (
	stateRecorded   = "recorded"
	statePublished  = "published"
	stateSuperseded = "superseded"
)

// record is the value stored per (workspace, message_id).
type record struct {
	Hash  string `json:"h"`
	State string `json:"s"`
	// After is set on a snapshot's record: the stream sequence of the
	// story head its publication is (or was last) expected to follow. A
	// published snapshot is the first message on its story subject after
	// After, so one read proves or disproves its publication.
	After *uint64 `json:"e,omitempty"`
}

// encodeRecord writes a record's JSON: the hash is hex and the states are
// constants, so nothing needs escaping.
func encodeRecord(hash, state string, after *uint64) []byte {
	b := make([]byte, 0, 112)
	b = append(b, `{"h":"`...)
	b = append(b, hash...)
	b = append(b, `","s":"`...)
	b = append(b, state...)
	b = append(b, '"')
	if after != nil {
		b = append(b, `,"e":`...)
		b = strconv.AppendUint(b, *after, 10)
	}
	return append(b, '}')
}

// decodeRecord reads a record's JSON.
func decodeRecord(b []byte) (record, error) {
	var r record
	err := json.Unmarshal(b, &r)
	return r, err
}

// getRecord reads the record of a key with a direct get (any replica of
// the records bucket answers); nil when there is none.
func (c *Core) getRecord(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	return recordFrom(c.ws.Records.Get(cctx, key))
}

// confirmRecord reads the record of a key from the records bucket's
// leader, which checks its compare-and-swaps: for a write the bucket
// refused over what a replica said. nil when there is none.
func (c *Core) confirmRecord(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	t0 := time.Now()
	entry, err := c.ws.RecordsLeader.Get(cctx, key)
	c.observe("leader_read", time.Since(t0))
	return recordFrom(entry, err)
}

// recordFrom is the record a read gives: nil when there is none.
func recordFrom(entry jetstream.KeyValueEntry, err error) (jetstream.KeyValueEntry, error) {
	if store.IsMissing(err) {
		return nil, nil
	}
	return entry, err
}

// mark writes the record's final state in the background, guarded by the
// revision this attempt owns.
func (c *Core) mark(id, key string, rev uint64, hash, state string) {
	c.marking.Store(key, struct{}{})
	c.marks.Add(1)
	go func() {
		defer c.marks.Done()
		defer c.marking.Delete(key)
		ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
		defer cancel()
		if err := c.fault(ctx, FaultMark, id); err != nil {
			return
		}
		t0 := time.Now()
		_, err := c.ws.Records.Update(ctx, key, encodeRecord(hash, state, nil), rev)
		c.observe("record_mark", time.Since(t0))
		if err != nil {
			c.log.Warn("marking record failed; the lease covers it", "workspace", c.ws.ID, "key", key, "state", state, "error", err)
		}
	}()
}
