// Dark and light themes: the choice is remembered; the first visit follows the system setting.
export function currentTheme() {
  const saved = localStorage.getItem("ha-theme");
  if (saved === "dark" || saved === "light") return saved;
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

export function applyTheme(theme = currentTheme()) {
  document.documentElement.dataset.theme = theme;
}

export function toggleTheme() {
  const next = currentTheme() === "dark" ? "light" : "dark";
  localStorage.setItem("ha-theme", next);
  applyTheme(next);
  window.dispatchEvent(new CustomEvent("ha-theme", { detail: next }));
  return next;
}
