package bus

import "time"

// SetConsumerAckWait shortens the ack timeout of the consumers created from
// now on, so that a test can see a redelivery; the returned function
// restores it. Tests that call it must not run in parallel.
func SetConsumerAckWait(d time.Duration) (restore func()) {
	old := consumerAckWait
	consumerAckWait = d
	return func() { consumerAckWait = old }
}
