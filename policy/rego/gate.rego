# Stages 4 to 6 in one evaluation: the first refusal in stage order, and the
# limits stage 6 enforces.
package storybus.gate

default refusal := null

refusal := data.storybus.access.refusal if {
	data.storybus.access.refusal != null
} else := data.storybus.firewall.refusal if {
	data.storybus.firewall.refusal != null
}

verdict := {"refusal": refusal, "limits": data.storybus.limits.limits}
