package storybus.publish_test

import data.storybus.publish

snapshot(story, system) := {"story_id": story, "system_id": system, "family": "story-context", "message_type": "story.context"}

# wire publishes a snapshot of a story cms owns: story.not_owner.
foreign := {"message": snapshot("s1", "wire"), "head": {"exists": true, "owner": "cms"}}

# cms publishes a snapshot of its own story: no violation.
own := {"message": snapshot("s1", "cms"), "head": {"exists": true, "owner": "cms"}}

refuse := {"ownership": {"notOwner": "refuse"}}

# Two workspace modules, as data.storybus.tenant holds them once compiled.
tenant := {
	"desk": {
		"deny": {{"rule": "tenant.no_obituaries", "message": "obituaries go through the obituary desk", "path": "/payload/desk"}},
		"warn": {{"rule": "tenant.short_headline", "message": "headline is very short"}},
	},
	"legal": {"deny": {{"rule": "tenant.embargoed", "message": "under embargo"}}},
}

test_ownership_is_the_ownership_module if {
	publish.ownership.owner == "cms" with data.workspace as {} with input as foreign
	publish.ownership.violation.rule == "story.not_owner" with data.workspace as {} with input as foreign
}

test_refused_not_owner_is_a_refusal_only if {
	r := publish.own_refusals with data.workspace as refuse with input as foreign
	count(r) == 1
	r[0].rule == "story.not_owner"
	publish.own_warnings == [] with data.workspace as refuse with input as foreign
}

test_tolerated_not_owner_is_a_warning_only if {
	w := publish.own_warnings with data.workspace as {} with input as foreign
	count(w) == 1
	w[0].rule == "story.not_owner"
	publish.own_refusals == [] with data.workspace as {} with input as foreign
}

test_the_owner_has_neither if {
	publish.own_refusals == [] with data.workspace as refuse with input as own
	publish.own_warnings == [] with data.workspace as refuse with input as own
	publish.own_refusals == [] with data.workspace as {} with input as own
	publish.own_warnings == [] with data.workspace as {} with input as own
}

test_tenant_denials_from_every_module if {
	d := publish.tenant_denials with data.workspace as {} with data.storybus.tenant as tenant with input as own
	count(d) == 2
	{x.rule | some x in d} == {"tenant.no_obituaries", "tenant.embargoed"}
}

test_tenant_warnings_from_every_module if {
	w := publish.tenant_warnings with data.workspace as {} with data.storybus.tenant as tenant with input as own
	[x.rule | some x in w] == ["tenant.short_headline"]
}

test_no_tenant_modules_no_tenant_violations if {
	publish.tenant_denials == [] with data.workspace as {} with input as own
	publish.tenant_warnings == [] with data.workspace as {} with input as own
}

test_decision_puts_ownership_before_the_workspace_rules if {
	d := publish.decision with data.workspace as refuse with data.storybus.tenant as tenant with input as foreign
	d.owner == "cms"
	count(d.refusals) == 3
	d.refusals[0].rule == "story.not_owner"
	{x.rule | some x in array.slice(d.refusals, 1, 3)} == {"tenant.no_obituaries", "tenant.embargoed"}
	[x.rule | some x in d.warnings] == ["tenant.short_headline"]
}

test_decision_tolerated_not_owner_warns_before_the_workspace_warnings if {
	d := publish.decision with data.workspace as {} with data.storybus.tenant as tenant with input as foreign
	[x.rule | some x in d.warnings] == ["story.not_owner", "tenant.short_headline"]
	{x.rule | some x in d.refusals} == {"tenant.no_obituaries", "tenant.embargoed"}
}

# The query for a workspace without modules of its own never reads
# storybus.tenant: the same decision as the full one when there are none.
test_ownership_decision_ignores_the_workspace_rules if {
	d := publish.ownership_decision with data.workspace as refuse with data.storybus.tenant as tenant with input as foreign
	d.owner == "cms"
	[x.rule | some x in d.refusals] == ["story.not_owner"]
	d.warnings == []
}

test_ownership_decision_is_the_decision_without_workspace_modules if {
	full := publish.decision with data.workspace as refuse with input as foreign
	short := publish.ownership_decision with data.workspace as refuse with input as foreign
	full == short
	tolerated := publish.ownership_decision with data.workspace as {} with input as foreign
	tolerated == publish.decision with data.workspace as {} with input as foreign
	tolerated.warnings[0].rule == "story.not_owner"
}
