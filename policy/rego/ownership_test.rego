package storybus.ownership_test

import data.storybus.ownership
import data.storybus.publish

snapshot(story, system) := {"story_id": story, "system_id": system, "family": "story-context", "message_type": "story.context"}

nohead := {"exists": false, "owner": ""}

test_first_snapshot_owns if {
	ownership.owner == "cms" with data.workspace as {} with input as {"message": snapshot("s1", "cms"), "head": nohead}
	ownership.violation == null with data.workspace as {} with input as {"message": snapshot("s1", "cms"), "head": nohead}
}

test_head_owner_is_kept if {
	inp := {"message": snapshot("s1", "wire"), "head": {"exists": true, "owner": "cms"}}
	ownership.owner == "cms" with data.workspace as {} with input as inp
	ownership.violation.rule == "story.not_owner" with data.workspace as {} with input as inp
}

test_owner_rule_beats_first_snapshot if {
	ws := {"ownership": {"owners": [{"storyIDPattern": "wire-.*", "systemID": "wire"}]}}
	ownership.owner == "wire" with data.workspace as ws with input as {"message": snapshot("wire-1", "cms"), "head": nohead}
	ownership.owner == "cms" with data.workspace as ws with input as {"message": snapshot("xwire-1", "cms"), "head": nohead}
}

test_handoff_beats_everything if {
	ws := {"ownership": {
		"owners": [{"storyIDPattern": ".*", "systemID": "planning"}],
		"handoffs": [{"storyID": "s1", "toSystemID": "cms"}, {"storyID": "s1", "toSystemID": "wire"}],
	}}
	ownership.owner == "wire" with data.workspace as ws with input as {"message": snapshot("s1", "wire"), "head": {"exists": true, "owner": "cms"}}
}

test_tolerate_is_a_warning_refuse_a_refusal if {
	inp := {"message": snapshot("s1", "wire"), "head": {"exists": true, "owner": "cms"}}
	d := publish.decision with data.workspace as {} with input as inp
	count(d.refusals) == 0
	d.warnings[0].rule == "story.not_owner"
	r := publish.decision with data.workspace as {"ownership": {"notOwner": "refuse"}} with input as inp
	r.refusals[0].rule == "story.not_owner"
	count(r.warnings) == 0
}

test_events_have_no_owner_check if {
	ev := {"story_id": "s1", "system_id": "wire", "family": "story-event", "message_type": "story.event"}
	ownership.violation == null with data.workspace as {} with input as {"message": ev, "head": {"exists": true, "owner": "cms"}}
}
