module rnnserve

go 1.26

require (
	gonum.org/v1/gonum v0.17.0
	gopkg.in/yaml.v3 v3.0.1
)
