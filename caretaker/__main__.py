"""`python -m caretaker`: the same as the cornus-caretaker command."""

from caretaker.main import main

if __name__ == "__main__":
    raise SystemExit(main())
