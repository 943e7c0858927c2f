module bspa

go 1.19
