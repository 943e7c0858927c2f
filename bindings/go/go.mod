module github.com/bspa-project/bspa/bindings/go

go 1.19
