# Stage 12 in one evaluation: ownership, then the workspace's own rules
# (modules in packages under storybus.tenant, with deny and warn sets).
package storybus.publish

ownership := data.storybus.ownership

own_refusals := [ownership.violation |
	ownership.violation != null
	ownership.refuse
]

own_warnings := [ownership.violation |
	ownership.violation != null
	not ownership.refuse
]

tenant_denials := [d |
	some name
	some d in data.storybus.tenant[name].deny
]

tenant_warnings := [w |
	some name
	some w in data.storybus.tenant[name].warn
]

# The decision without workspace modules: the query used when a workspace
# has none, which spares walking an empty storybus.tenant tree per request.
ownership_decision := {
	"owner": ownership.owner,
	"refusals": own_refusals,
	"warnings": own_warnings,
}

decision := {
	"owner": ownership.owner,
	"refusals": array.concat(own_refusals, tenant_denials),
	"warnings": array.concat(own_warnings, tenant_warnings),
}
