<#
.SYNOPSIS
  Installs csi-proxy as the Windows service `csiproxy` (upstream's name, flags and sc.exe lines),
  with a restart policy, and starts it. Run from an elevated PowerShell on the node.

.EXAMPLE
  .\install-service.ps1                                   # the exe beside this script's folder
  .\install-service.ps1 -Flags '-v=2 -metrics-bind-address=localhost:8888'
  .\install-service.ps1 -Uninstall
#>
param(
    # csi-proxy.exe from the release zip (the zip's root holds it, one level above deploy\windows).
    [string]$Source = (Join-Path $PSScriptRoot '..\..\csi-proxy.exe'),
    # Where the service runs it from: upstream's documented location.
    [string]$BinDir = 'C:\etc\kubernetes\node\bin',
    [string]$LogFile = 'C:\etc\kubernetes\logs\csi-proxy.log',
    # Further flags, e.g. '-kubelet-path=D:\kubelet -working-dir=D:\data -v=2'.
    [string]$Flags = '',
    [switch]$Uninstall
)
$ErrorActionPreference = 'Stop'
$Name = 'csiproxy'

function Invoke-Sc {
    & sc.exe @args
    if ($LASTEXITCODE -ne 0) { throw "sc.exe $($args -join ' ') failed with exit code $LASTEXITCODE" }
}

$existing = Get-Service -Name $Name -ErrorAction SilentlyContinue
if ($existing) {
    # Stopping drains open calls: at most 5 s for connections, 10 s for host calls.
    if ($existing.Status -ne 'Stopped') { Stop-Service -Name $Name }
    Invoke-Sc delete $Name
    # The service control manager removes a deleted service once no handle to it is open.
    $deadline = (Get-Date).AddSeconds(30)
    while (Get-Service -Name $Name -ErrorAction SilentlyContinue) {
        if ((Get-Date) -gt $deadline) { throw "service $Name is still registered 30 s after sc.exe delete" }
        Start-Sleep -Milliseconds 500
    }
}
if ($Uninstall) { return }

New-Item -ItemType Directory -Force -Path $BinDir | Out-Null
$exe = Join-Path $BinDir 'csi-proxy.exe'
Copy-Item -Force -Path $Source -Destination $exe

# Upstream's lines. The daemon reports Running only once all 23 pipes exist.
Invoke-Sc create $Name start= auto binPath= "$exe -windows-service -log_file=$LogFile -logtostderr=false $Flags".TrimEnd()
# Restart after 10 s, 10 s, then 60 s; the count of failures resets after a day without one.
Invoke-Sc failure $Name reset= 86400 actions= restart/10000/restart/10000/restart/60000
# Also restart when the daemon stops itself with a non-zero exit code (a pipe it cannot create,
# serving failed): by default the recovery actions only follow a crash.
Invoke-Sc failureflag $Name 1
Invoke-Sc start $Name
Get-Service -Name $Name
