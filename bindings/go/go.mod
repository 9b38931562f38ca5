module tpurt.dev/go/tpurt

go 1.19
