from caretaker.main import main

raise SystemExit(main())
