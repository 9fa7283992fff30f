module example.com/floor

go 1.26

require (
	example.com/floor/nested v0.0.0
	example.com/floorplan v0.0.0
)

replace (
	example.com/floor/nested => ./nested
	example.com/floorplan => ./floorplan
)
