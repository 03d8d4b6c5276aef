package storybus.firewall_test

import data.storybus.firewall

req := {"client_ip": "10.1.2.3", "media_type": "application/json", "json_depth": 3, "body": "{\"headline\":\"hello\"}"}

test_no_rules_let_everything_in if {
	firewall.refusal == null with data.workspace as {} with input as {"request": req}
}

test_client_cidrs if {
	fw := {"firewall": {"allowedCIDRs": ["10.0.0.0/8"]}}
	firewall.refusal == null with data.workspace as fw with input as {"request": req}
	firewall.refusal.rule == "request.blocked" with data.workspace as fw
		with input as {"request": object.union(req, {"client_ip": "192.0.2.1"})}
}

test_content_types if {
	fw := {"firewall": {"contentTypes": ["application/json"]}}
	firewall.refusal == null with data.workspace as fw with input as {"request": req}
	firewall.refusal.rule == "request.blocked" with data.workspace as fw
		with input as {"request": object.union(req, {"media_type": "text/plain"})}
}

test_json_depth if {
	fw := {"firewall": {"maxJSONDepth": 3}}
	firewall.refusal == null with data.workspace as fw with input as {"request": req}
	firewall.refusal.rule == "request.blocked" with data.workspace as fw
		with input as {"request": object.union(req, {"json_depth": 4})}
}

test_blocked_patterns if {
	fw := {"firewall": {"blockedPatterns": ["(?i)<script"]}}
	firewall.refusal == null with data.workspace as fw with input as {"request": req}
	firewall.refusal.rule == "request.blocked" with data.workspace as fw
		with input as {"request": object.union(req, {"body": "{\"headline\":\"<SCRIPT>x\"}"})}
}
