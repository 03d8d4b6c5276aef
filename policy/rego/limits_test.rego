package storybus.limits_test

import data.storybus.limits

ws := {
	"limits": {"ratePerSecond": 10, "burst": 20},
	"connections": {
		"cms": {"name": "cms"},
		"capped": {"name": "capped", "limits": {"ratePerSecond": 1, "dailyQuota": 5}},
		"unlimited": {"name": "unlimited", "limits": {}},
	},
}

test_conn_is_the_named_connection if {
	limits.conn.name == "capped" with data.workspace as ws with input as {"connection": "capped"}
	not limits.conn with data.workspace as ws with input as {"connection": "nobody"}
}

test_connection_limits_win_over_the_workspace if {
	l := limits.limits with data.workspace as ws with input as {"connection": "capped"}
	l == {"ratePerSecond": 1, "dailyQuota": 5}
}

# A connection that sets limits, even none, sets all of them: its empty
# limits are unlimited, not the workspace's defaults (as effectiveLimits in
# the bus's metrics reads them).
test_empty_connection_limits_are_unlimited if {
	limits.limits == {} with data.workspace as ws with input as {"connection": "unlimited"}
}

test_connection_without_limits_takes_the_workspace_defaults if {
	limits.limits == {"ratePerSecond": 10, "burst": 20} with data.workspace as ws with input as {"connection": "cms"}
}

test_unknown_connection_takes_the_workspace_defaults if {
	limits.limits == {"ratePerSecond": 10, "burst": 20} with data.workspace as ws with input as {"connection": "nobody"}
}

test_no_limits_anywhere_is_unlimited if {
	bare := {"connections": {"cms": {"name": "cms"}}}
	limits.limits == {} with data.workspace as bare with input as {"connection": "cms"}
}
