module dsv4

go 1.19
