package storybus.grants_test

import data.storybus.grants

ws := {"connections": {
	"cms": {"grant": {"publish": {"systemIDs": ["cms"], "messageTypes": ["story.context"]}, "consume": {"families": ["*"]}}},
	"all": {"grant": {"publish": {"systemIDs": ["*"], "messageTypes": ["*"]}}},
	"none": {},
}}

msg(system, type) := {"system_id": system, "message_type": type}

test_granted if {
	grants.refusal == null with data.workspace as ws with input as {"connection": "cms", "message": msg("cms", "story.context")}
	grants.refusal == null with data.workspace as ws with input as {"connection": "all", "message": msg("x", "asset.reference")}
}

test_system_id_outside_grant if {
	r := grants.refusal with data.workspace as ws with input as {"connection": "cms", "message": msg("wire", "story.context")}
	r.rule == "grant.system_id"
	r.path == "/system_id"
}

test_message_type_outside_grant if {
	grants.refusal.rule == "grant.message_type" with data.workspace as ws
		with input as {"connection": "cms", "message": msg("cms", "story.event")}
}

test_no_grant_grants_nothing if {
	grants.refusal.rule == "grant.system_id" with data.workspace as ws
		with input as {"connection": "none", "message": msg("cms", "story.context")}
}

test_consumer_families if {
	grants.families == ["*"] with data.workspace as ws with input as {"connection": "cms"}
	grants.families == [] with data.workspace as ws with input as {"connection": "none"}
}
