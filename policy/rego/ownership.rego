# Stage 12, ownership: a story's owner is its last hand-off's target, else
# the system the first matching owner rule assigns, else the owner carried
# by the story head (the system of its first accepted snapshot), else the
# publishing system.
package storybus.ownership

own := object.get(data.workspace, "ownership", {})

handoffs := [h.toSystemID |
	some h in object.get(own, "handoffs", [])
	h.storyID == input.message.story_id
]

rule_owners := [o.systemID |
	some o in object.get(own, "owners", [])
	regex.match(sprintf("^(?:%s)$", [o.storyIDPattern]), input.message.story_id)
]

owner := handoffs[count(handoffs) - 1] if {
	count(handoffs) > 0
} else := rule_owners[0] if {
	count(rule_owners) > 0
} else := input.head.owner if {
	input.head.owner != ""
} else := input.message.system_id

refuse := object.get(own, "notOwner", "tolerate") == "refuse"

default violation := null

violation := {
	"rule": "story.not_owner",
	"message": sprintf("the story is owned by %s, not %s", [owner, input.message.system_id]),
	"path": "/system_id",
} if {
	input.message.family == "story-context"
	owner != input.message.system_id
}
