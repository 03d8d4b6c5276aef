package storybus.access_test

import data.storybus.access

ws := {"connections": {
	"cms": {"name": "cms"},
	"off": {"name": "off", "active": false},
	"aws": {"name": "aws", "iam": {"accessKeyID": "AK", "verified": false}},
	"ok": {"name": "ok", "iam": {"accessKeyID": "AK2", "verified": true}},
}}

test_active_connection_passes if {
	access.refusal == null with data.workspace as ws with input as {"connection": "cms", "iam": false}
}

test_inactive_connection_refused if {
	access.refusal.rule == "connection.inactive" with data.workspace as ws with input as {"connection": "off", "iam": false}
}

test_unverified_role_refused_on_iam_routes_only if {
	access.refusal.rule == "iam.role.unverified" with data.workspace as ws with input as {"connection": "aws", "iam": true}
	access.refusal == null with data.workspace as ws with input as {"connection": "aws", "iam": false}
	access.refusal == null with data.workspace as ws with input as {"connection": "ok", "iam": true}
}
