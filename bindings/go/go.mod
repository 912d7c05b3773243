module github.com/libaccel/libaccel/bindings/go

// 1.24: runtime.AddCleanup (iter.Seq2 needs 1.23).
go 1.24
