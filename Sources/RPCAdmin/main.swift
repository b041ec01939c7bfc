import Core
print("todo")
