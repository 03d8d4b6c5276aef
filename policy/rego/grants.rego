# Stage 9: the connection's grants. "*" grants everything.
package storybus.grants

grant := object.get(data.workspace.connections, [input.connection, "grant"], {})

publish := object.get(grant, "publish", {})

default refusal := null

refusal := {
	"rule": "grant.system_id",
	"message": sprintf("connection %s may not publish as system_id %q", [input.connection, input.message.system_id]),
	"path": "/system_id",
} if {
	not granted(object.get(publish, "systemIDs", []), input.message.system_id)
} else := {
	"rule": "grant.message_type",
	"message": sprintf("connection %s may not publish %s", [input.connection, input.message.message_type]),
	"path": "/message_type",
} if {
	not granted(object.get(publish, "messageTypes", []), input.message.message_type)
}

# families the connection may consume.
families := object.get(grant, ["consume", "families"], [])

granted(list, _) if "*" in list

granted(list, value) if value in list
