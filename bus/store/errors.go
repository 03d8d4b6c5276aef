package store

import (
	"errors"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrorKind is what a failed store operation means to its caller: the one
// classification of JetStream's errors that every caller in the bus uses,
// so that no two of them disagree about whether a failed write landed.
type ErrorKind int

// The kinds of store errors, from the most to the least specific: Classify
// returns the first that applies.
const (
	// KindNone: the operation succeeded.
	KindNone ErrorKind = iota
	// KindConflict: a compare-and-swap lost. The key exists (Create), is not at
	// the expected revision (Update, Delete), or the subject's last
	// message is not the expected one (a publish with an expected last
	// subject sequence). Nothing was written.
	KindConflict
	// KindMissing: the key or message holds nothing (never written, deleted,
	// expired). An answer, not a failure.
	KindMissing
	// KindDefiniteFailure: the operation failed and wrote nothing. The store
	// answered with an error, no stream was there to answer, the client
	// refused the request before sending it, or the caller marked it
	// ErrNotWritten.
	KindDefiniteFailure
	// KindMayHaveLanded: the operation failed without saying whether it was
	// carried out: a timeout, a request given up, a connection lost while
	// waiting for the answer, an answer that could not be read. A write
	// may be in the store.
	KindMayHaveLanded
)

// String names the kind, for logs and test failures.
func (k ErrorKind) String() string {
	switch k {
	case KindNone:
		return "no error"
	case KindConflict:
		return "conflict"
	case KindMissing:
		return "missing"
	case KindDefiniteFailure:
		return "definite failure"
	case KindMayHaveLanded:
		return "may have landed"
	}
	return "unknown"
}

// ErrNotWritten marks an error the caller knows never reached the store,
// such as a failure injected in place of a write; joined to (or wrapping)
// any error, it makes Classify answer KindDefiniteFailure.
var ErrNotWritten = errors.New("store: not written")

// Classify tells what err, returned by a store operation, means. Anything
// it does not know is KindMayHaveLanded: a caller that treats an unknown
// outcome as a definite one could write twice or free twice.
func Classify(err error) ErrorKind {
	switch {
	case err == nil:
		return KindNone
	case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || IsWrongLastSequence(err):
		return KindConflict
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrMsgNotFound):
		return KindMissing
	case IsPublishInProcess(err):
		// The store's answer, but not that nothing was written: the
		// publish in process with the same message id may land.
		return KindMayHaveLanded
	case notWritten(err):
		return KindDefiniteFailure
	}
	return KindMayHaveLanded
}

// jsErrCodeDuplicateInProcess is nats-server's
// JSStreamDuplicateMessageConflict (10158): a replicated stream refused a
// message because another with the same Nats-Msg-Id is being proposed
// and not yet stored. nats.go names no constant for it.
const jsErrCodeDuplicateInProcess jetstream.ErrorCode = 10158

// IsPublishInProcess reports a publish a replicated stream refused
// because another publish of the same message id is in process: that one
// may land, so the message may be on the stream once it has.
func IsPublishInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeDuplicateInProcess
}

// notWritten reports a failure known to have written nothing.
func notWritten(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || // the store answered no
		errors.Is(err, ErrNotWritten) ||
		// No stream listened on the subject.
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		// The client refused the request before sending it.
		errors.Is(err, nats.ErrBadSubject) || errors.Is(err, jetstream.ErrInvalidKey) ||
		errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrInvalidMsg) ||
		errors.Is(err, nats.ErrInvalidConnection) || errors.Is(err, nats.ErrInvalidContext)
}

// IsConflict reports a compare-and-swap that lost to another writer.
func IsConflict(err error) bool { return Classify(err) == KindConflict }

// IsMissing reports a key or message that holds nothing.
func IsMissing(err error) bool { return Classify(err) == KindMissing }

// MayHaveLanded reports a failed write that may nonetheless be in the
// store; false for nil and for every failure known to have written
// nothing (a conflict, a missing key, a definite failure).
func MayHaveLanded(err error) bool { return Classify(err) == KindMayHaveLanded }

// IsDefiniteFailure reports a failure that wrote nothing and is neither a
// conflict nor a missing key.
func IsDefiniteFailure(err error) bool { return Classify(err) == KindDefiniteFailure }

// IsWrongLastSequence reports whether err is a JetStream compare-and-swap
// failure: a publish whose expected last sequence did not match. Replicated
// streams answer with a different code than single-replica ones.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// jsErrCodeStreamStoreFailed is nats-server's JSStreamStoreFailedF (10077):
// the stream did not store a message, its description saying why. nats.go
// names no constant for it.
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// IsFull reports a write that a stream refused because it holds its
// MaxBytes or MaxMsgs: a topic's (WithTopicLimits) or a shared records
// bucket's (Options.SharedRecordsMaxBytes). The store answered 10077 with
// nats-server's own ErrMaxBytes or ErrMaxMsgs as the description, the only
// part of the answer that tells a full stream from another store failure.
// Nothing was written (Classify says KindDefiniteFailure), and nothing the
// stream held was dropped for it.
func IsFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrCodeStreamStoreFailed {
		return false
	}
	return apiErr.Description == server.ErrMaxBytes.Error() || apiErr.Description == server.ErrMaxMsgs.Error()
}

// ErrUnavailable marks a failure that is the store's, not its caller's:
// the cluster out of reach, an answer that did not come, a stream it
// would not create. The same operation may succeed later, unchanged.
// Unavailable marks an error so.
var ErrUnavailable = errors.New("store unavailable")

// Unavailable marks err, the failure of an operation on the store, with
// ErrUnavailable; its text stays err's.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
