"""Writes sample-trajectories.jsonl: two small, realistic agent trajectories written for Loom's
README and tests (not taken from any dataset). Run: python3 examples/make_sample.py"""
import json, textwrap

def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

def module(name, n):
    out = [f'"""{name}: part of the calc package."""', "import re", ""]
    for i in range(n):
        out += [f"def {name}_rule_{i}(tokens, pos):",
                f"    # rule {i}: match a {['number','name','operator','paren'][i % 4]} at pos",
                f"    if pos >= len(tokens):",
                f"        raise ParseError(f'unexpected end of input at {{pos}} in rule {i}')",
                f"    tok = tokens[pos]",
                f"    return tok, pos + 1", ""]
    return "\n".join(out)

parser = module("parser", 40)
lexer = module("lexer", 25)
traceback = textwrap.dedent("""\
    ============================= test session starts ==============================
    collected 48 items

    tests/test_parser.py ....................F.......                         [ 58%]
    tests/test_lexer.py ....................                                  [100%]

    =================================== FAILURES ===================================
    ______________________ test_unary_minus_after_paren ____________________________

        def test_unary_minus_after_paren():
    >       assert evaluate("(-3) * 2") == -6
    tests/test_parser.py:212:
    calc/parser.py:118: in parser_rule_17
        raise ParseError(f'unexpected token {tok!r} at {pos}')
    E   calc.errors.ParseError: unexpected token '-' at 1
    =========================== short test summary info ============================
    FAILED tests/test_parser.py::test_unary_minus_after_paren - calc.errors.ParseError
    ========================= 1 failed, 47 passed in 0.41s =========================
    """)
listing = "\n".join(["calc/__init__.py", "calc/errors.py", "calc/lexer.py", "calc/parser.py",
                     "calc/eval.py", "tests/test_parser.py", "tests/test_lexer.py", "setup.cfg",
                     "README.md", "pyproject.toml"])
grep = "\n".join(f"calc/parser.py:{100+i*3}:    if tok == '-' and prev in UNARY_CONTEXT_{i}:" for i in range(9))

swe = [
    {"role": "system", "content": "You are a software engineering agent. Use the bash tool to inspect and edit the repository. Run the tests before you finish."},
    {"role": "user", "content": "The calculator rejects a unary minus right after an opening parenthesis: `evaluate('(-3) * 2')` raises ParseError. Fix it in the calc package and keep all tests passing."},
    {"role": "assistant", "content": "Let me look at the repository layout.", "tool_calls": [call("call_01", "bash", {"command": "find . -name '*.py' -o -name '*.cfg' -o -name '*.toml' | sort"})]},
    {"role": "tool", "tool_call_id": "call_01", "content": listing},
    {"role": "assistant", "content": "I'll run the tests to see the failure.", "tool_calls": [call("call_02", "bash", {"command": "python -m pytest -q"})]},
    {"role": "tool", "tool_call_id": "call_02", "content": traceback},
    {"role": "assistant", "content": "The failure is in parser_rule_17. Let me read the parser.", "tool_calls": [call("call_03", "bash", {"command": "cat calc/parser.py"})]},
    {"role": "tool", "tool_call_id": "call_03", "content": parser},
    {"role": "assistant", "content": "Where is the unary context decided?", "tool_calls": [call("call_04", "bash", {"command": "grep -n \"tok == '-'\" calc/parser.py"})]},
    {"role": "tool", "tool_call_id": "call_04", "content": grep},
    {"role": "assistant", "content": "The lexer may also be involved; let me read it.", "tool_calls": [call("call_05", "bash", {"command": "cat calc/lexer.py"})]},
    {"role": "tool", "tool_call_id": "call_05", "content": lexer},
    {"role": "assistant", "content": "UNARY_CONTEXT_2 lacks '('. I'll add it.", "tool_calls": [call("call_06", "bash", {"command": "sed -i \"s/UNARY_CONTEXT_2 = {'start', 'op'}/UNARY_CONTEXT_2 = {'start', 'op', '('}/\" calc/parser.py"})]},
    {"role": "tool", "tool_call_id": "call_06", "content": ""},
    {"role": "assistant", "content": "Now rerun the tests.", "tool_calls": [call("call_07", "bash", {"command": "python -m pytest -q"})]},
    {"role": "tool", "tool_call_id": "call_07", "content": "................................................                         [100%]\n48 passed in 0.39s\n"},
    {"role": "assistant", "content": "All 48 tests pass. Let me review the change.", "tool_calls": [call("call_08", "bash", {"command": "git diff"})]},
    {"role": "tool", "tool_call_id": "call_08", "content": "diff --git a/calc/parser.py b/calc/parser.py\n--- a/calc/parser.py\n+++ b/calc/parser.py\n@@ -104 +104 @@\n-UNARY_CONTEXT_2 = {'start', 'op'}\n+UNARY_CONTEXT_2 = {'start', 'op', '('}\n"},
    {"role": "assistant", "content": "Fixed: a '(' now opens a unary context in calc/parser.py (UNARY_CONTEXT_2); tests/test_parser.py::test_unary_minus_after_paren passes with the other 47 tests."},
]

order = {"order_id": "#W2378156", "user_id": "mia_garcia_4516", "status": "delivered",
         "items": [{"item_id": f"10{i}234{i}", "name": n, "price": p, "options": {"color": c}}
                   for i, (n, p, c) in enumerate([("Wireless Earbuds", 129.99, "black"), ("Laptop Sleeve", 39.5, "grey"), ("USB-C Hub", 58.0, "silver")])],
         "payment_history": [{"transaction_type": "payment", "amount": 227.49, "payment_method_id": "credit_card_9513926"}],
         "address": {"address1": "742 Evergreen Terrace", "city": "Springfield", "zip": "49007", "country": "USA"}}
support = [
    {"role": "system", "content": "You are a retail support agent. Authenticate the user before acting. Only exchange delivered items, and confirm every action with the user first."},
    {"role": "user", "content": "Hi, I'm Mia Garcia, zip 49007. I want to exchange the earbuds from my last order for the white ones."},
    {"role": "assistant", "content": None, "tool_calls": [call("call_a1", "find_user_id_by_name_zip", {"first_name": "Mia", "last_name": "Garcia", "zip": "49007"})]},
    {"role": "tool", "tool_call_id": "call_a1", "content": "mia_garcia_4516"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_a2", "get_user_details", {"user_id": "mia_garcia_4516"})]},
    {"role": "tool", "tool_call_id": "call_a2", "content": json.dumps({"name": {"first_name": "Mia", "last_name": "Garcia"}, "orders": ["#W2378156", "#W1130240"], "payment_methods": {"credit_card_9513926": {"last_four": "4421"}}})},
    {"role": "assistant", "content": None, "tool_calls": [call("call_a3", "get_order_details", {"order_id": "#W2378156"})]},
    {"role": "tool", "tool_call_id": "call_a3", "content": json.dumps(order)},
    {"role": "assistant", "content": "I found order #W2378156 with the Wireless Earbuds (item 1002342, black, $129.99). White is available at the same price. Shall I exchange them, with any difference charged to your card ending 4421?"},
    {"role": "user", "content": "Yes please."},
    {"role": "assistant", "content": None, "tool_calls": [call("call_a4", "exchange_delivered_order_items", {"order_id": "#W2378156", "item_ids": ["1002342"], "new_item_ids": ["1002349"], "payment_method_id": "credit_card_9513926"})]},
    {"role": "tool", "tool_call_id": "call_a4", "content": json.dumps({"order_id": "#W2378156", "status": "exchange requested", "exchange_items": ["1002342"], "exchange_new_items": ["1002349"], "exchange_price_difference": 0.0})},
    {"role": "assistant", "content": "Done: the exchange for order #W2378156 is requested. You'll get instructions by email to return the black earbuds; the white ones ship when they arrive."},
]
with open("examples/sample-trajectories.jsonl", "w") as f:
    f.write(json.dumps({"id": "sample/calc-unary-minus", "source": "sample", "messages": swe, "meta": {}}) + "\n")
    f.write(json.dumps({"id": "sample/retail-exchange", "source": "sample", "messages": support, "meta": {}}) + "\n")
