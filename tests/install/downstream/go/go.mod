module example.com/mytrainer

go 1.24

require github.com/libaccel/libaccel/bindings/go v0.2.4
