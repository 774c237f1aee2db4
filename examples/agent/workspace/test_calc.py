from calc import add, mul

assert mul(3, 4) == 12
assert add(2, 3) == 5, f"add(2, 3) gave {add(2, 3)}"
print("PASS")
