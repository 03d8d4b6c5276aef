module github.com/storybus/storybus/hack/tools/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.94.1

require (
	github.com/alecthomas/kingpin/v2 v2.4.0 // indirect
	github.com/alecthomas/units v0.0.0-20240927000941-0f3dac36c52b // indirect
	github.com/prometheus/common v0.71.0 // indirect
	github.com/xhit/go-str2duration/v2 v2.1.0 // indirect
)
