// The console's one script: a "Copy" button copies the text of the
// element its data-copy names. Everything else works without it.
"use strict";
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent).then(
    () => { button.textContent = "Copied"; },
    () => { button.textContent = "Copy failed"; },
  );
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
});
