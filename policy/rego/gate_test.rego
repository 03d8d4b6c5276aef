package storybus.gate_test

import data.storybus.gate

ws := {
	"limits": {"ratePerSecond": 10, "burst": 20},
	"firewall": {"contentTypes": ["application/json"]},
	"connections": {
		"cms": {"name": "cms"},
		"capped": {"name": "capped", "limits": {"dailyQuota": 5}},
		"off": {"name": "off", "active": false},
	},
}

req := {"client_ip": "127.0.0.1", "media_type": "application/json", "json_depth": 2}

test_limits_fall_back_to_the_workspace if {
	v := gate.verdict with data.workspace as ws with input as {"connection": "cms", "request": req}
	v.refusal == null
	v.limits == {"ratePerSecond": 10, "burst": 20}
}

test_connection_limits_win if {
	v := gate.verdict with data.workspace as ws with input as {"connection": "capped", "request": req}
	v.limits == {"dailyQuota": 5}
}

test_stage_four_before_stage_five if {
	v := gate.verdict with data.workspace as ws
		with input as {"connection": "off", "request": object.union(req, {"media_type": "text/plain"})}
	v.refusal.rule == "connection.inactive"
}

test_firewall if {
	v := gate.verdict with data.workspace as ws
		with input as {"connection": "cms", "request": object.union(req, {"media_type": "text/plain"})}
	v.refusal.rule == "request.blocked"
}
