module example.com/floorplan

go 1.26
