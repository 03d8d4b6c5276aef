# Stage 6 parameters: the connection's rate limit and daily quota. The
# counters live in the store; the policy only says what the limits are.
package storybus.limits

conn := data.workspace.connections[input.connection]

default limits := {}

limits := conn.limits if {
	conn.limits
} else := data.workspace.limits if {
	data.workspace.limits
}
