module example.com/floor/nested

go 1.26
